"""SSH into sessions: users' public keys (``keys``); the connections themselves are relayed by
``manager/proxy/ssh.py`` to the agent (``agent/streams/ssh.py``). See README.md."""
