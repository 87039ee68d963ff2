# SPDX-License-Identifier: MIT
"""Clients: the control-plane ``UMBPMasterClient``, the heartbeat loop and the pool client."""
