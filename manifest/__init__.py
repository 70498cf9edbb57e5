"""manifest/: the CAS-advanced manifest, writer epochs and fencing, checkpoints, clones, GC rules."""
