# Manifests, publisher, applier, decoders.
