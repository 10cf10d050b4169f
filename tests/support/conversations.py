"""Chat conversations the video-LLM tests share: one question, and a multi-turn one with a system prompt."""


SINGLE = [
    {"role": "user", "content": "What colour is the square?"},
    {"role": "assistant", "content": "The square is red."},
]
MULTI = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What colour is the square?"},
    {"role": "assistant", "content": "The square is red."},
    {"role": "user", "content": "Which way does the square move?"},
    {"role": "assistant", "content": "It moves left to right."},
]
