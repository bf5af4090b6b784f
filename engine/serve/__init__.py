"""``innerguard serve``: vLLM's own OpenAI-compatible server with the guard
inside. vLLM's app, serving classes and argument parser are reused; this
package adds the pieces around them:

- ``context``: what the HTTP layer learned about a request (validated
  innerguard field, trusted tenant/tags), carried to the engine call;
- ``client``: the engine client the serving classes call; it prepares each
  request through ``innerguard.engine.requests`` and enforces the verdict;
- ``decisions``: fetches the worker's verdicts, batched;
- ``middleware``: boundary validation, route allow-list, the ``innerguard``
  object in responses;
- ``admin``, ``reload``, ``metrics``: status, live reload, Prometheus.
"""
