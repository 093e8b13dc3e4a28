"""What each model was trained with: runs' declarations (model, base model, stage, parameters)
and their compute by method, summed per model along its base-model chain."""
