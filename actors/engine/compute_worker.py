"""Entry point of a compute worker process: ``python -m inkpen.actors.engine.compute_worker``.

Kept apart from :mod:`inkpen.actors.engine.compute` so the worker runs a module no one else imports.
"""

from inkpen.actors.engine.compute import serve

if __name__ == "__main__":
    serve()
