"""The Keras 3 optimizer family. Each class: constructor, ``build`` (its slots), the kernel call, config."""
