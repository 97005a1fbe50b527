# rule codegen_model: see the stage's module (bringup) — written with the stage.
