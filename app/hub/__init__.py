"""Models the user does not have yet: found on the Hugging Face Hub, planned from their
headers before a byte of weights is downloaded, and fetched into the Hub's own cache
(where the library, and every other tool, already looks).

``connection`` says where the Hub is and turns every way a request fails into one
line; ``files`` names a file on the Hub; ``remote_header`` reads a GGUF header with
range requests; ``search`` and ``picks`` find repositories; ``planning`` chooses the
quantisation that fits and a draft that matches; ``download`` fetches, resumes and
verifies.
"""
