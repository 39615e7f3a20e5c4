"""A local Azure OpenAI batch emulator (development and tests only).

An HTTP server speaking the files and batches API that the unmodified ``openai`` SDK
uses through ``AzureOpenAI(azure_endpoint=...)`` (``/openai/...?api-version=``) and
``OpenAI(base_url=.../openai/v1/)``: uploads, Global Batch jobs with their status
progression, deterministic answers, output and error files. See README.md.
"""

__version__ = "0.1.0"
