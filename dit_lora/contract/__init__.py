"""The contract between the training loop and a model family: the spec (:mod:`.spec`: ``FamilySpec``, ``FamilyInfo``
and the fallbacks of its optional components), the component protocols (:mod:`.capabilities`), the loaded parts of a
run (:mod:`.family`: ``Components``). It imports no family and no module of the layers above it (data, output,
training); the run config only for type checking."""
