"""Agent harness environments: an agent program runs inside a workspace sandbox and reaches the
trainer only through one host HTTP gateway (``bridge.py`` binds it in, ``relay.py`` relays to it)."""
