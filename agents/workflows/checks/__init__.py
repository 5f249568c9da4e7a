"""The checks of a workflow beyond its schema: the graph and the installed world (the
templates' checks are in templates.py).

Each check returns findings ``(node id, dotted field path, message)`` (``findings.py``); the
loader turns them into problems naming the file and the line (``nodes.2.cases.0.goto`` → where
the parser saw it). ``graph.py`` checks the nodes and edges, ``joins.py`` where parallel
branches meet (joins that cannot fire, approvals that could wait at once), ``installed.py``
what the nodes name in the installed world (tools and their arguments, skills, model
profiles, sub-workflows).
"""
