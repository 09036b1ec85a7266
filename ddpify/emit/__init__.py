"""Writing the migration out: the edits the rules planned, applied in one pass at node level
(edits.py), the code of the DDP target (ddp.py), argument edits, rank-0 guard layout,
imports, collectives and the one line length. Emit decides nothing about what to migrate."""
