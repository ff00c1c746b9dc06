package staggerconnect

import "connectrpc.com/connect"

// WrapStreamingClient implements connect.Interceptor.
func (c *Client) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor: a handler's stream is
// left alone.
func (c *Client) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
