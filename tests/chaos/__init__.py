"""The chaos suite (`make chaos`): a real gateway against misbehaving engines and clients."""
