module github.com/stagger-go/stagger/cmd/stagger

go 1.26.0

require (
	github.com/stagger-go/stagger v0.0.0-00010101000000-000000000000
	github.com/stagger-go/stagger/lab v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/failsafe-go/failsafe-go v0.9.8 // indirect
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.4 // indirect
	go.yaml.in/yaml/v3 v3.0.4 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)

replace (
	github.com/stagger-go/stagger => ../../
	github.com/stagger-go/stagger/lab => ../../lab
)
