// Package testserver runs stagger's test service (proto/stagger/testing/v1) in
// process and makes it fail on demand, so the interceptors can be tested end to
// end against real gRPC.
//
// # Serving
//
// New serves over bufconn (dial with Server.Dial, Server.ClientConn, or
// Server.DialOption and BufnetTarget); WithTCP or Server.StartTCP also serve on
// 127.0.0.1 on a free port (Server.Addr, Server.DialTCP). Server.StopServing
// closes the TCP listener and every TCP connection, so clients get "connection
// refused" until Server.Resume listens again on the same port. Close stops
// everything and returns only when every goroutine the server started has ended.
// A server and its clients work inside a testing/synctest bubble when they are
// created inside it (bufconn only: real sockets are not durably blocking).
//
// # Per-call scripts
//
// Every request carries a Script; the server groups attempts by Script.key and
// numbers them on arrival (1 = first). For each attempt, in this order:
//
//  1. the server-wide modes may reject it (below);
//  2. headers_first sends response headers at once (so a later failure comes
//     after the RPC was committed; on a successful attempt it changes nothing);
//  3. the attempt waits attempt_delays[n-1] if present, else delay, on the
//     server's clock; when the attempt's context ends first, the attempt ends
//     there and is recorded as Cancelled;
//  4. attempts 1..fail_attempts fail with code (0 means UNAVAILABLE) and
//     message (default "testserver: scripted failure of attempt N"), with every
//     pushback value sent verbatim as one grpc-retry-pushback-ms trailer value
//     (so two values make a repeated trailer) and, when retry_info_delay is set, a
//     google.rpc.RetryInfo detail. Streams fail like this after their messages:
//     ListItems after messages_before_failure messages (fewer when its list
//     ends first); Upload right after
//     receiving its messages_before_failure-th message, or, when that is 0, after
//     the client closed its side; Chat after messages_before_failure echoes;
//  5. unary methods and ListItems only: the next reset_attempts attempts
//     (after the failing ones) run to completion (counted by Executions,
//     recorded with Reset; ListItems sends at most messages_before_failure
//     messages) and then, instead of answering, the server drops the
//     attempt's connection: a TCP reset (SO_LINGER 0), or a closed bufconn.
//     The client's transport fails with no status from the server, the
//     ambiguous failure of a request that ran (for ListItems, a stream broken
//     mid-way: messages still queued on the server may be lost with the
//     connection); every call on that connection fails with it;
//  6. other attempts succeed: unary methods answer one Reply, ListItems sends
//     the items of a list of response_count after the request's start_after
//     (seq start_after+1, ..., response_count; a negative start_after is
//     INVALID_ARGUMENT), Upload answers the seqs it received in order, Chat
//     echoes each message with its seq.
//
// Upload and Chat read the script from the first message, so for them steps 1-3
// happen after it arrived (the arrival time is still the stream's start).
// Replies carry payload_bytes bytes, negative meaning 0 and at most MaxPayload.
//
// # Records
//
// Attempts(key) returns, per attempt, the method, the grpc-previous-rpc-attempts
// and idempotency-key headers as sent, arrival time, and how it ended (code,
// cancelled, rejected, headers sent, messages sent). AwaitAttempts waits for
// attempts to end. Executions(method) counts attempts that ended with OK or
// Reset: the number of times the method's side effect ran. Calls with an empty key are
// counted but not recorded per key.
//
// # Server-wide modes
//
// For load tests, settable at New and changeable while serving: an outage
// (SetOutage, or SetOutageWindow on the server's clock) fails every attempt with
// UNAVAILABLE; a Capacity (SetCapacity) admits at most MaxConcurrent attempts at
// once and at most PerSecond per one-second window (fixed windows counted from
// New), rejecting the rest with RESOURCE_EXHAUSTED and an optional pushback
// trailer; a failure rate (WithFailureRate, SetFailureRate) fails attempts with
// UNAVAILABLE, drawn from a seeded source; the reset mode (WithResets,
// SetResets) drops the connection of every unary or ListItems attempt its
// script would answer with success, after it ran, as reset_attempts does
// (step 5) but whatever the key: a replica that resets every attempt it
// receives; a delay factor (WithDelayFactor, SetDelayFactor) makes every
// scripted delay (step 3) that many times as long: a slow replica among
// replicas that get the same scripts; Workers (WithWorkers, SetWorkers) make
// the server pay for its work: Count workers take the attempts in arrival order
// from a FIFO queue of at most Queue, each spending Service on an attempt it
// serves and a tenth of it on one it rejects (queue full: RESOURCE_EXHAUSTED) or
// drops (deadline passed while it waited); an attempt whose caller cancels, or
// whose deadline passes while it is served, costs the whole Service; only Reduced
// workers take attempts from ReducedFrom to ReducedTo, and work begun from
// SlowFrom to SlowTo costs Slow times as much. They are checked in that
// order, before the script; an attempt the Workers admit runs its script once
// served. Stats and Arrivals (attempts per bucket, default 100 ms) count every
// attempt; Stats also gives the attempts queued, the worker time booked, and
// the part of it wasted on callers that had gone.
//
// # Time
//
// The server reads time only through its Clock (WithClock); the default is the
// time package, which inside a testing/synctest bubble is virtual. The one
// exception is an attempt's deadline, which gRPC sets on the time package's clock:
// the Workers mode carries it over to the server's clock when the attempt arrives.
//
// # Concurrency
//
// Server and all its methods are safe for concurrent use. One mutex guards the
// records, counters and modes; handlers never hold it while waiting. The Workers
// mode starts no goroutine: it books worker time when an attempt arrives, and the
// attempt's handler waits for its turn on the server's clock.
package testserver
