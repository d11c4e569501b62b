"""Apps in sessions: the terminal every session has and the apps its image declares (see
README.md): ``access`` (who may open them; the proxy's gate), ``origins`` (each app's origin and
the login handed to it), ``links`` (streams to agents, dialled back over the channel),
``states`` (their states, starting one) and ``traffic`` (their use counts as the session's).
Which apps a session has, their commands and tokens, is ``images.app_catalog``: creating a
session and assigning it to a node read it too, and this package builds on sessions."""
