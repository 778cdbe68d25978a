from .tta import DetectorWithAugment, TwoStageDetector
