"""The tool server's catalogue: every skill tool, the meta-tools and the workflows as tools
for other agents, one implementation behind MCP and the OpenAI-style HTTP tools."""
