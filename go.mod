module github.com/stagger-go/stagger

go 1.22

require (
	github.com/bufbuild/protocompile v0.8.0
	github.com/cncf/xds/go v0.0.0-20240318125728-8a4994d93e50
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.1.0
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.4
	golang.org/x/net v0.26.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20240318140521-94a12d6c2237
	google.golang.org/grpc v1.64.1
	google.golang.org/protobuf v1.33.0
)

require (
	github.com/envoyproxy/protoc-gen-validate v1.0.4 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/kr/text v0.2.0 // indirect
	golang.org/x/sync v0.7.0 // indirect
	golang.org/x/sys v0.21.0 // indirect
	golang.org/x/text v0.16.0 // indirect
)
