"""actors/read/: the lock-free read path (no actors).

``views`` are the immutable states the actors publish; ``path`` reads and folds over them;
``checkpoint_views`` builds the same views from one manifest, for Readers and Spark tasks.
"""
