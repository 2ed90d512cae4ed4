"""Hardware design-space exploration (`retarget explore`, docs/explore.md).

A target declares its design space (`Target.design_space()`: varied config fields, legal
values, constraints and a resource model: targets/space.py); `explore()` compiles the model for
each point and times it with the cycle model (no simulation), over a process pool or Ray,
resumable from a JSONL results file, and returns the Pareto front over the chosen objectives.

    from retarget.explore import Problem, explore
    from retarget.targets.vta.target import VTATarget
    problem = Problem.prepare("zoo:resnet18", "vta", size=224)
    result = explore(problem, VTATarget.design_space(), budget=200, results="sweep.jsonl")
"""
from .evaluation import Problem, evaluate
from .runner import (OBJECTIVES, ExploreResult, compute_front, explore, objective_values,
                     parse_objectives, spot_check)
from ..targets.space import (PARTS, Constraint, DesignSpace, Param, Part, Resources, bram18,
                    canonical_key, pareto_front)

__all__ = ["Constraint", "DesignSpace", "ExploreResult", "OBJECTIVES", "PARTS", "Param", "Part",
           "Problem", "Resources", "bram18", "canonical_key", "compute_front", "evaluate",
           "explore", "objective_values", "pareto_front", "parse_objectives", "spot_check"]
