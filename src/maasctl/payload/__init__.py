"""The payload processor: Envoy's ext_proc protocol in front of the data-plane pipeline's processor stages.

- `modes`: the two filters (pre, post) and the processing modes the rendered Envoy filter configures;
- `stages`: the push-style interface of the pipeline the processor drives (one exchange per stream);
- `headers`: header maps and mutations, shared by the processor and the Envoy side;
- `stream`: the per-stream state machine (which message may come when, what it is answered with);
- `server`: the gRPC service, health and metrics; `envoy`: the Envoy side, for the local gateway and tests.
"""
