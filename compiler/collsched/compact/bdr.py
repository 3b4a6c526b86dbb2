"""The compact form of bdr (version 2 of the description, docs/compact.md): its tail, its
registration in desc.TAIL_FORMS. Not served yet."""
