# SPDX-License-Identifier: MIT
"""The peer side: page allocation, owned blocks, the event log and the UMBPPeer service."""
