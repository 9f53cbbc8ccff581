"""The weights stage's logic: manifests from hub metadata, parallel verification with a record
beside the weights, disk-space check, directory lock, fan-out planning, hub and peer fetches.

Everything here runs on the nodes (Python 3.11, standard library only) except ``hubclient``'s
functions, which run in the tool venv where huggingface_hub is installed, and ``plan``, which the
controller uses through a filter. No Ansible imports.
"""
