"""The OpenAI-compatible gateway in front of the policy (``lit-coderl serve``, ``env.name: harness``).

An agent program that calls an LLM through the OpenAI API (mini-swe-agent, SWE-agent, a user's
own scaffold) talks to the policy through this server: it batches concurrent requests into the
generation engine and records, per episode, the exact token ids the engine saw and sampled and
the sampler's log-probs, so that an episode's training rows are rebuilt without re-tokenising
anything (``records.py``). Files, one job each: ``records.py`` (what a call leaves, and how an
episode's calls become rows), ``render.py`` (chat messages to prompt ids, appending to the
sampled tokens where a history extends the last call), ``requests.py`` (request bodies to
generation jobs, replies, one-line 4xx errors), ``batcher.py`` (the queue the engine's owner
thread drains), ``server.py`` (the aiohttp server: routes, episodes, TCP and unix sockets),
``cli.py`` (``lit-coderl serve``). See ``docs/gateway.md``.
"""
