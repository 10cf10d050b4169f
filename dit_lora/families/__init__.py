"""The built-in model families, one package each; :data:`dit_lora.registry.BUILT_IN` names them (the one list).

Each package's ``__init__.py`` defines ``ENTRY``, its :class:`~dit_lora.registry.FamilyEntry`. The registry
(:mod:`dit_lora.registry`) imports these packages by name on its first lookup; this package holds no registry code
and names no family, so importing it imports none. What the families share is not here but in :mod:`dit_lora.kit`,
one layer below.
"""
