"""Apps in sessions: the terminal every session has and the apps its image declares (see
README.md): ``catalog`` (which apps, their commands and tokens), ``access`` (who may open them;
the proxy's gate), ``links`` (streams to agents, dialled back over the channel), ``states``
(their states, starting one) and ``traffic`` (their use counts as the session's)."""
