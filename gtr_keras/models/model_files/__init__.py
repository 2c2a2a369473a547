"""A model's files on disk, below the model classes that read and write them: `model_directory` (a preset
directory's files and the checks of its settings against its weights), `model_source` (a name, id or
directory resolved once into its path and format), `preset_writer` (a model directory written as a unit) and
`fingerprint` (SHA-256 of a model's weights)."""
