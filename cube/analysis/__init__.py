"""From records to numbers: rescoring, confirmation of the frozen prediction, flagged cells, statistics, simulation and partial-credit exam scoring."""
