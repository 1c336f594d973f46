"""A synthetic KITTI dataset: ray-cast HDL-64E scans of procedural street scenes, written in KITTI's layout.

It is the pipeline's default dataset: a Point-GNN trains on it on a laptop CPU in minutes, and every stage
(reader, graph, targets, training, evaluation) runs on the same files a real KITTI root holds::

    OUT/training/velodyne/NNNNNN.bin        float32 (N, 4) x, y, z, reflectance (velodyne frame), ~120k points
    OUT/training/calib/NNNNNN.txt           a real KITTI calibration (drive 2011_09_26)
    OUT/training/label_2/NNNNNN.txt         Car / Van / Pedestrian / Cyclist / DontCare, KITTI's 15 fields
    OUT/training/image_2/NNNNNN.png         1242 x 375 RGB, ray-traced from camera 2
    OUT/training/painted_lidar/NNNNNN.npy   float64 (M, 8) PointPainting rows of the points image_2 sees
    OUT/ImageSets/{train,val,trainval}.txt

How a frame is made (all randomness from ``np.random.default_rng([seed, index])``, so a frame's bytes depend
only on (seed, index, config), never on how many frames are written):

1. Scene. A road (2-4 lanes, right-hand traffic, optional parking strips and a cross street) with sidewalks,
   front yards and building blocks or low walls on each side; ground with a gentle slope and undulation.
   Objects in road slots: moving cars and vans in lanes (heading with the lane), parked ones at the kerb,
   crossing traffic on the cross street, pedestrians on sidewalks (some crossing), cyclists at the road edge.
   Then poles, traffic signs, trees and bushes. Footprints never overlap (separating-axis test, 0.25 m gap).
   Objects are 5-60 m from the sensor, three quarters of them ahead (in the camera's view).
2. Labels first, geometry second. Each object's KITTI label (camera frame, values rounded to the 2 decimals a
   label file holds) is fixed before its geometry, and the geometry is built inside that exact box: a car is
   a body box, a narrower glass cabin and four wheel cylinders; a van a body and a hood; a pedestrian two leg
   cylinders, an ellipsoid torso and a head; a cyclist two thin wheels, a frame and a rider. Every part stays
   ``INSET_SIDE`` (6 cm) inside the box's sides and ``INSET_VERTICAL`` (3 cm) inside its top and bottom; the
   box's bottom is put ``GROUND_CLEARANCE`` (>= 3 cm, rounded up) above the highest ground under its
   footprint. With the range noise clipped to ``range_noise_clip_m`` (5 cm, which moves a point at most 5 cm
   sideways and 2.1 cm vertically at the steepest beam), the reader finds inside each label box exactly the
   points that hit that object: no ground, no neighbour, none of its own points lost.
3. Scan. A spinning 64-laser sensor like KITTI's Velodyne HDL-64E at 1.73 m: an upper block of 32 lasers from
   +2.0 to -8.33 deg (1/3 deg apart) and a lower block of 32 from -8.83 to -24.33 deg (1/2 deg apart),
   0.16 deg azimuth steps (2,250 columns, 144k rays). Rays are intersected (numba) with the ground height
   field (bracketed root search), boxes, cylinders and ellipsoids; the candidate primitives of each azimuth
   column come from their bird's-eye bounding circles. The recording car's own roof, bonnet and boot swallow
   the lowest lasers' rays to the front and back (as in KITTI). A return needs enough power: its range must
   be below ``max_range_m * sqrt(reflectivity * (0.3 + 0.7 cos incidence) / 0.25)`` (dark glass fades out
   near 50 m); then ``dropout`` of the returns are lost at random and the range gets N(0, 2 cm) noise
   clipped to 5 cm. Reflectance (``reported_reflectance``) falls with incidence and range (KITTI-like: ~0.25
   on near asphalt, ~0.3 on near objects, mostly 0 beyond 50 m) and comes in steps of 0.01.
4. Occlusion (``occluded`` 0-3) from the scan itself: of the rays (before dropout and range loss) whose line
   meets the object within ``max_range_m``, the fraction whose first hit is the object. >= 0.8 visible -> 0
   (fully visible), >= 0.4 -> 1 (partly occluded), >= 0.1 -> 2 (largely occluded), less (or no ray at all,
   e.g. a far pedestrian between two lasers) -> 3 (unknown); the devkit leaves level 3 out of every
   difficulty, as for real KITTI.
5. Labels. The 2D box is the 3D box's projection (cut at the near plane) clipped to [0, W-1] x [0, H-1];
   truncation = 1 - clipped area / unclipped area (``pgnn.core.boxes.boxes_to_image_2d``); alpha = ry -
   arctan2(x, z). Only objects whose 2D box has area in the image are written (KITTI labels what the camera
   sees); those under ``dontcare_min_height_px`` (20 px) tall are written as DontCare regions.
6. Image. Camera 2 rays are cast into the same scene (exact occlusion, no painter's algorithm): sky gradient,
   asphalt with lane markings, pavement, grass, shaded surfaces with per-object colours (car paint, dark
   glass, black tyres, clothes and skin, facades with windows, foliage), distance haze and pixel noise.
   Rays go through the centres of ``image_render_scale`` x ``image_render_scale`` pixel blocks (2: a quarter
   of the pixels) and the picture is scaled up bilinearly; the noise is added per pixel.
7. Painting. The points image_2 sees (``pgnn.data.frames.fov_mask``) get PointPainting scores [background,
   bicycle_or_rider, car, pedestrian]: a Dirichlet draw around the one-hot class of the object the ray hit
   (Car and Van -> car, Pedestrian -> pedestrian, Cyclist -> bicycle_or_rider, anything else -> background).

Measured (``benchmarks/synth_speed.py``, 10 frames of seed 0): 110.6-123.8k points a scan (mean 117k) and
17.4-20.3k in the camera's view (mean 19.2k); real KITTI scans have 113-127k and 18.6-20.3k. Scan and image
take most of a frame's time (numba casts all 144k rays against ground and primitives faster than numpy does
the boxes alone); time per frame: benchmarks/README.md, "Measurements behind the code".

Modules, in the order a frame is made (the package imports none of them; import from the modules)::

    config      SynthConfig (the knobs) and CLASSES
    calib       KITTI's calibration, optionally jittered
    road        the road, the ground height field and its materials
    primitives  boxes, cylinders and ellipsoids in their local frames
    raycast     the first hit of each ray (numba)
    layout      a scene under construction and its footprints
    shapes      the parts of cars, vans, pedestrians and cyclists
    objects     placing labelled objects (sizes, slots, exact label boxes)
    clutter     buildings, walls, poles, signs, trees, bushes, the recording car
    scene       Scene and sample_scene
    lidar       the HDL-64E-like scan
    labels      KITTI labels and occlusion
    image       image_2, ray-traced
    painted     PointPainting scores
    dataset     frame_rng, generate_frame, write_frame, split_frame_ids, generate_dataset
"""
