"""The data path: a client connection from the socket it was accepted on to its broker and back (the client
side, the request pipeline, the throttle gate, the upstream side) and the limits it reads under (request
memory, each broker's load, the peer watch)."""
