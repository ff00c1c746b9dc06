# Pinned tool versions, shared by the Makefile and .ci/run (which reads this file).
BUF_VERSION=v1.60.0
PROTOC_GEN_GO_VERSION=v1.33.0
PROTOC_GEN_GO_GRPC_VERSION=v1.5.1
STATICCHECK_VERSION=v0.8.2
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da
