"""Generated protobuf/gRPC stubs (make generate). Never edit by hand."""
