"""Video-language models: VideoChat-style question answering data, prompts and model specs."""
