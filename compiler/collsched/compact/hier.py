"""The compact form of hier (version 2 of the description, docs/compact.md): its tail, its
registration in desc.TAIL_FORMS. Not served yet."""
