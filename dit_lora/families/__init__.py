"""The built-in model families, one package each (``sana``, ``cogvideox``, ``dit``, ``videollm``, ``wan``).

Each package's ``__init__.py`` defines ``ENTRY``, its :class:`~dit_lora.registry.FamilyEntry`. The registry
(:mod:`dit_lora.registry`) lists these packages by name (``BUILT_IN``) and imports them on its first lookup; this
package holds no registry code, so importing it imports no family.
"""
