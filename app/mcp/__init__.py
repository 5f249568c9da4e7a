"""MCP: the tool server over streamable HTTP at /mcp."""
