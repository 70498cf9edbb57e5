"""actors/: the pykka actors of inkpen: Bookie, Inker, Penciller, their clerks, file clerks."""
