"""Entry point of a compute worker process: ``python -m inkpen.actors.compute_worker``.

Kept apart from :mod:`inkpen.actors.compute` so the worker runs a module no one else imports.
"""

from inkpen.actors.compute import serve

if __name__ == "__main__":
    serve()
