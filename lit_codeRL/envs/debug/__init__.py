"""The pdb debugging gym: ``DebugEnv`` (``env.py``), its tool calls (``tools.py``) and debugger (``pdb_session.py``)."""
