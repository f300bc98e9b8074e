"""Scenario files and the code that turns them into networks.

scenario file --(loader, model, scenario)--> resolved Scenario --(network)--> live Mininet network
"""
