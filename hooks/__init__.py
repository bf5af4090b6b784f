"""innerguard's worker side: everything that runs inside the vLLM worker.

Hooks capture and steer activations, analyzers turn captures into signals.
Nothing here parses YAML: it consumes the compiled plan's plain data.
"""
