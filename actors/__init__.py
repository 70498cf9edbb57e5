"""actors/: the pykka actors of inkpen: Bookie, Inker, Penciller, their clerks, file clerks.

The rooms, each importing only the rooms below it (the import-linter contracts in pyproject.toml
hold them to it):

    engine/    one open writer as a whole: the Engine, the Bookie actor, GC, hot backup, the
               compactor role
    write/     the Inker, and the checks it runs on what it writes (conditions, merges, the
               index specs deletes imply, the record of commits transactions validate against)
    read/      the lock-free read path over published views; Readers' views
    journal/   the Inker's clerk, intake and replay: values, segments, journal files
    ledger/    the Penciller and its clerk: memory tables, L0, levels, merges
    files/     one clerk actor per stored file; the owners' snapshot registry
    kernel/    what every room shares: context, manifest keeper, scheduler, throttle, views,
               compute workers
    base.py    the actor base class; call / send / stop: the one way actors talk

Who may wait on whom (``call``), so that no two actors ever wait on each other:

    Bookie ──▶ Inker, Penciller, clones          clones ──▶ Inker, Penciller
    Inker ──▶ Penciller, file clerks             Penciller ──▶ file clerks
    clerks of the Inker and Penciller ──▶ file clerks (they tell their owner their results)

Everything in the other direction is a tell: the Inker tells the Bookie a batch is durable
(``ApplyBatch``), the Penciller tells the Bookie it has room again (``LedgerRoom``), clerks tell
their owners their results. A tell that goes up is declared with its sender, since the receiver's
room sits above. The fence is no message: every actor asks the manifest keeper
(``ManifestKeeper.fenced``).
"""
