"""The long-running controller: gRPC in, routes out through the drivers.

Protobuf types appear only in `convert` and `servicer`; the engine works on plain data.
"""
