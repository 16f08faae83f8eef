"""The floor under the stages: parts that several stages share and that import no stage."""
