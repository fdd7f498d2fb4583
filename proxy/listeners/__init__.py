"""Where clients come in: the listening sockets, the accept loop, TLS contexts and free ports."""
