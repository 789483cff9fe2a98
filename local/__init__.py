"""What every layer above stands on, and nothing of the A2A service: the workspace's
``.a2a/`` folder as one typed layout (:mod:`.layout`), the one atomic write
(:mod:`.atomic_files`), the redaction registry (:mod:`.redaction`), file names and new
files (:mod:`.files`), request signing (:mod:`.signing`) and the outbound address policy
(:mod:`.addresses`).

It imports only from ``protocol``; ``agent``, ``server``, ``client`` and the hosts import
from it (CONTRIBUTING.md, "The layers"). Import the modules themselves: this package
exports nothing, so importing one of them loads no other.
"""
