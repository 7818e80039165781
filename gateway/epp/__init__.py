"""`kvgate epp`: the gateway's routing as a Gateway API Inference Extension endpoint picker.

A proxy (Envoy, or a Gateway built on it) streams each request to the picker over Envoy's
ext_proc gRPC protocol; the picker parses the body as the front door does, runs the same
router, and answers with the chosen endpoint (`x-gateway-destination-endpoint` header and
`envoy.lb` metadata). `messages` builds and reads the protocol's messages, `picker` holds the
routing and accounting, `processor` is the per-stream state machine, `server` runs it all.
"""
