"""Entry point of a compute worker process: ``python -m inkpen.actors.kernel.compute_worker``.

Kept apart from :mod:`inkpen.actors.kernel.compute` so the worker runs a module no one else imports.
"""

from inkpen.actors.kernel.compute import serve

if __name__ == "__main__":
    serve()
