"""Pod discovery from the Kubernetes API: the ready pods an `InferencePool` selects.

`kube_api` is a minimal list/watch client over httpx (decision 0007), `informer` keeps one
resource's objects current through list + watch, `endpoints` turns a pool and its pods into
endpoints (pure), and `pool_watch` ties them together for one pool; `inference_objects` reads
and watches the pool's InferenceObjectives and InferenceModelRewrites. No web framework here.
"""
