"""The data path: a client connection from the socket it was accepted on to its broker and back (the client
side, the request pipeline, the filter chain it runs, the throttle gate, the upstream side), the entity gate
a throttled entity's requests wait at across its connections, and the limits it reads under (request
memory, each broker's load, the peer watch)."""
