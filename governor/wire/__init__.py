"""The control socket's protocol and server, and the data of what it serves: status, ps and
the metrics."""
