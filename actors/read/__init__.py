"""actors/read/: reads over the published views (no actors).

``path`` reads and folds over the views the owners publish (``actors/kernel/views``); ``many``
batches point reads; ``checkpoint_views`` builds views from one manifest, for Readers and Spark
tasks; ``follower`` keeps them following the store; ``feed`` reads the change feed;
``anti_entropy`` folds tictac trees. The writer's checks, which read the same views, are in
``actors/write/``.
"""
