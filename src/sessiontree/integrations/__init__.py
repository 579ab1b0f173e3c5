"""Other frameworks' persistence on a store of sessions. Each module is imported by its
own name and needs its framework (an extra): `sessiontree.integrations.langgraph`
(`pip install 'sessiontree[langgraph]'`)."""
