"""innerguard's engine side: everything that runs outside the vLLM worker.

Policy language, linter, compiler, decisions, audit and the command line.
Nothing here imports vLLM worker internals; the compiled plan
(``innerguard.engine.plan``) is the only thing handed to ``innerguard.hooks``.
"""
